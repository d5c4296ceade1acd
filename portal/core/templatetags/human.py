"""`{{ value|human_time }}` and `{{ value|human_date }}`: see `portal.core.humantime`."""

from __future__ import annotations

from django import template

from portal.core import humantime

register = template.Library()
register.filter("human_time", humantime.human_time)
register.filter("human_date", humantime.human_date)
