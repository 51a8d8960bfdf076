"""Moving a ccweb-store database: copied whole to another engine (``copy``), backed up while
it is in use (``backup``), written back out in cc-web's JSON layout (``export``). Engine
independent: what differs between SQLite and PostgreSQL is the store's (``Store.snapshot``,
``UnitOfWork.copy_rows``, ``Store.backup``)."""
