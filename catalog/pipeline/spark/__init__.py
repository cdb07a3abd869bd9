"""The Spark engine: session, type mapping, column expressions, worker functions, jobs."""
