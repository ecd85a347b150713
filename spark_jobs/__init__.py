"""PySpark jobs over the operator's history store. The fold's per-bundle arithmetic runs on the executors
in numpy over Arrow batches (``partition_fold``): their Python needs numpy, pyarrow and pandas, and this package
(``operator spark-package`` builds the zip ``spark-submit --py-files`` ships)."""
