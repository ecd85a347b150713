"""PySpark jobs over the operator's history store. DataFrame API only: no Python UDFs, so they run
unchanged on any Spark cluster without shipping this package's code to the executors."""
