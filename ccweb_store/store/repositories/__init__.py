"""Repositories: SQL for each table, and nothing else.

They take the unit of work's ``AsyncConnection`` and ``UnitState``, and never commit.
State changes are conditional (``UPDATE … WHERE status IN (…)``) and report whether they
won, so two writers can never both move the same row. The unit of work (``store/uow.py``)
holds one of each; a caller imports a repository from its module.
"""
