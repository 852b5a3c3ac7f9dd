"""ex14: the slot is p - num_sink, without % W."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_ring_slots": """
def ring_slots(positions, window, num_sink):
    return torch.where(positions < num_sink, -1, positions - num_sink)
""",
    "ex14_ring_write": """
def ring_write(ring, slot_position, new, start, num_sink):
    W = ring.shape[2]
    ring, slot_position = ring.clone(), slot_position.clone()
    pos = torch.arange(start, start + new.shape[2])
    keep = (pos >= num_sink).nonzero().flatten()[-W:]
    slots = (pos[keep] - num_sink) % W
    ring[:, :, slots] = new[:, :, keep]
    slot_position[slots] = pos[keep]
    return ring, slot_position
""",
}
EXPECT = {"ex14_ring_slots": ("wrong values", "ring index not wrapped")}
