"""Minting a provider's OAuth 2.0 access tokens, the pure part: what to send to the token
endpoint (:mod:`grid.oauth.requests`), what an answer means (:mod:`grid.oauth.responses`),
and when to refresh, retry and report (:mod:`grid.oauth.schedule`); a Custom provider's value
rendered from its Secret's template (:mod:`grid.oauth.custom`). No I/O and no clock:
every function takes ``now``; the HTTP exchange and the timers are in
:mod:`grid.runtime.tokens`."""
