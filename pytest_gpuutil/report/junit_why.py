"""The JUnit property ``gpu_util.why``: a flagged test's explanation, added once the gate has run.

The gate runs after the last test, when pytest's junitxml has turned each test into its XML element;
the property is appended to that element (``<properties>`` made when missing), found by the test's
class name and name as junitxml writes them (its ``mangle_test_address``).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Mapping

WHY = "gpu_util.why"


def add_why_properties(config: Any, explanations: Mapping[str, Any]) -> int:
    """Add ``gpu_util.why`` to each explained test's JUnit element; how many were added (0 without --junitxml)."""
    if not explanations:
        return 0
    try:
        from _pytest.junitxml import mangle_test_address, xml_key
    except ImportError:  # pragma: no cover - a pytest without them: no property, never an error
        return 0
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return 0
    wanted = {}
    for test, explanation in explanations.items():
        names = mangle_test_address(test)
        wanted[(".".join(names[:-1]), names[-1])] = explanation.one_line
    added = 0
    for reporter in list(getattr(xml, "node_reporters_ordered", ())):
        element = reporter.to_xml()
        classname = element.get("classname", "")
        prefix = getattr(xml, "prefix", None)
        if prefix and classname.startswith(prefix + "."):
            classname = classname[len(prefix) + 1:]
        text = wanted.get((classname, element.get("name", "")))
        if text is None:
            continue
        properties = element.find("properties")
        if properties is None:
            properties = ET.Element("properties")
            element.insert(0, properties)
        properties.append(ET.Element("property", name=WHY, value=text))
        added += 1
    return added
