"""Tenants: organizations (billing accounts), memberships with roles, projects (namespaces)."""
