"""Trace files to columns of GPU events: the event model, the readers (Kineto's own layout, any
Chrome trace), exact µs→ns times. Imports nothing from the layers above.
"""
