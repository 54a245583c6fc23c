"""The chaos suite: whole meshes of ``grid agent`` processes in network namespaces, under
seeded schedules of partitions, one-way loss, pauses, crashes, restarts, provider edits and
budget spends, checked against what must hold once healed (see ``invariants.py``)."""
