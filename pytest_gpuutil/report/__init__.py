"""What users read: terminal tables, gpu_util.csv/json, CI outputs (JUnit properties, GitHub
step summary), metric tables and pytest-benchmark interop.
"""
