"""Test support for Grid's Kubernetes side: an API server emulator on loopback, fixtures
that bind the official client and kopf operators to it, and polling helpers."""
