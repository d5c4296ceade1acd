"""Lets a developer run this folder beside other engineers' test runs on the same PostgreSQL:
with TRANCHE_TEST_DB_NAME set, the test database gets that name instead of test_tranche."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    from django.db import connections

    # Consumers touch the database from sync_to_async threads; persistent connections there
    # outlive the test and block dropping the test database.
    connections["default"].settings_dict["CONN_MAX_AGE"] = 0
    name = os.environ.get("TRANCHE_TEST_DB_NAME")
    if name:
        connections["default"].settings_dict.setdefault("TEST", {})["NAME"] = name
