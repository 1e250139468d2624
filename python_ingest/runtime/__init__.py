"""Runtime: the SparkSession and the pinned JVM classpath it runs with."""
