"""Orders: subscriptions (the entitlement), the orders that change them, and reported usage."""
