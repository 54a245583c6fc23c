"""The Grid Booklet: interactive chapters on SWIM probing, CRDT convergence and the scoring
pipeline, each driven by Grid's own code.

- :func:`grid.booklet.site.build_site`: every page, asset and the data the real code
  produced, in memory; :func:`grid.booklet.site.write_site` writes it out.
- :func:`grid.booklet.serve.booklet_routes`: GET routes serving it, with the scoring API.
"""
