"""Code generation: dbt converters, lake models and suites for tapped tables."""
