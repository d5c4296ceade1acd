"""The shared facts of Tranche, one home each: names and labels, product specs, order states and
condition reasons, quota defaults, the pure claim-template renderer, and the agent <-> portal
message schema with its validation.

Dependency-free by contract (`lint-imports`): it imports nothing of portal, controller,
nodeagent, Django or kubernetes, so all three may import it.
"""
