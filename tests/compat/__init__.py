"""The pyspark client x Spark Connect server compatibility matrix (scripts/compat.sh)."""
