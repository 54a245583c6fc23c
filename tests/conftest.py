"""Shared pytest configuration.

The Kubernetes harness (an emulated API server, clients and kopf runners) lives in the
``tests/k8s`` package; its fixtures are registered here for every test module.
"""

pytest_plugins = ["k8s.fixtures"]
