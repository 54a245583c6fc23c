"""Reusable pieces for Grid's tests: a PKI generator (``support.pki``) and real servers on
127.0.0.1 (``support.servers``): a TLS endpoint, plain-TCP misbehavers, and a provider
endpoint serving ``/healthz`` and Prometheus ``/metrics`` that a test can steer.

Test modules import them as ``from support.pki import make_pki`` (pytest puts ``tests/`` on
``sys.path``, as the directory has no ``__init__.py``).
"""
