"""Requests the SDK sends that aiokafka does not ship, on aiokafka's protocol classes."""
