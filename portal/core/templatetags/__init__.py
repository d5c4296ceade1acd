"""Template filters every portal page shares (`{% load human %}`)."""
