"""What both shells run around a :class:`grid.engine.SiteEngine`, whatever feeds them
(a YAML directory or the Kubernetes API): the SWIM node driver, the observation loops, the
TLS prober of peer sites, SWIM keyring parsing and the Prometheus and ``/healthz`` HTTP
pieces. I/O lives here; every decision stays in the engine.
"""
