"""Order states and kinds, and the condition types and reasons the controller reports on orders
and subscriptions (constants, so a reader can match on them)."""

from __future__ import annotations

# order states (the values stored in portal's Order.state)
PENDING = "pending"
PROVISIONING = "provisioning"
ACTIVE = "active"
FAILED = "failed"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
OPEN_ORDER_STATES = (PENDING, PROVISIONING, CANCELLING)  # the controller still has work to do

# order kinds
BUY = "buy"
RESIZE = "resize"
CANCEL = "cancel"

# condition types
READY = "Ready"
PROVISIONING_CONDITION = "Provisioning"
FAILED_CONDITION = "Failed"

# condition reasons
REASON_APPLYING = "Applying"
REASON_APPLIED = "Applied"
REASON_QUOTA_APPLIED = "QuotaApplied"
REASON_CANCELLED = "Cancelled"
REASON_CLAIMS_STILL_ALLOCATED = "ClaimsStillAllocated"
REASON_WAITING_FOR_CLAIMS = "WaitingForClaims"
REASON_UNKNOWN = "Unknown"
