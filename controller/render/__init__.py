"""Pure renderers: plain specs in, Kubernetes object dicts out.

No Django and no kubernetes client here (an import contract checks it), so every renderer is a
function that golden-file tests can pin.
"""
