"""Billing staff tooling: staff groups and CSV exports of subscriptions and orders."""
