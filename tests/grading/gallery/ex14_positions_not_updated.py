"""ex14: slot_position is returned unchanged."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_ring_write": """
def ring_write(ring, slot_position, new, start, num_sink):
    W = ring.shape[2]
    ring, slot_position = ring.clone(), slot_position.clone()
    pos = torch.arange(start, start + new.shape[2])
    keep = (pos >= num_sink).nonzero().flatten()[-W:]
    slots = ring_slots(pos[keep], W, num_sink)
    ring[:, :, slots] = new[:, :, keep]
    return ring, slot_position
""",
}
EXPECT = {"ex14_ring_write": ("wrong values", "slot_position not updated")}
