"""Record values as table columns: the declared column types (Spark DDL) and JSON values
checked and converted against them. Pure."""
