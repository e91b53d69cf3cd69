"""Where in the source a finding's cause lies (see :mod:`pytest_gpuutil.analysis.places.attribution`)."""
from pytest_gpuutil.analysis.places.attribution import (
    CALL_RULES, COPY, MAX_PLACES, SYNC, HostActivity, HostCalls, HostSamples, Place, Site, before_cuda,
    call_places, first_place_text, idle_samples, places_of, sampled_places, source_text, with_places,
)

__all__ = ["CALL_RULES", "COPY", "MAX_PLACES", "SYNC", "HostActivity", "HostCalls", "HostSamples", "Place", "Site",
           "before_cuda", "call_places", "first_place_text", "idle_samples", "places_of", "sampled_places",
           "source_text", "with_places"]
