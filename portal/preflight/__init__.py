"""Pre-flight: will a tenant's manifest be admitted, start, and run well on its GPU slice?"""
