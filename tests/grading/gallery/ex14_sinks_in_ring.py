"""ex14: tokens before num_sink are written into the ring too."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_ring_write": """
def ring_write(ring, slot_position, new, start, num_sink):
    W = ring.shape[2]
    ring, slot_position = ring.clone(), slot_position.clone()
    pos = torch.arange(start, start + new.shape[2])
    keep = torch.arange(new.shape[2])[-W:]
    slots = (pos[keep] - num_sink) % W
    ring[:, :, slots] = new[:, :, keep]
    slot_position[slots] = pos[keep]
    return ring, slot_position
""",
}
EXPECT = {"ex14_ring_write": ("wrong values", "sinks written to the ring")}
