"""Pydantic models of Grid's custom resources, their statuses and phases."""
