"""A suite as data: its YAML, validated whole, the frame arithmetic and the monitoring a case asks for."""
