"""ex14: the buffer is shifted (oldest first) instead of written in place."""

NOTEBOOK = "ex14"
REPLACE = {
    "ex14_ring_write": """
def ring_write(ring, slot_position, new, start, num_sink):
    W = ring.shape[2]
    ring, slot_position = ring.clone(), slot_position.clone()
    pos = torch.arange(start, start + new.shape[2])
    held = slot_position >= 0
    order = slot_position[held].argsort()
    keep = pos >= num_sink
    kept_pos = torch.cat([slot_position[held][order], pos[keep]])[-W:]
    kept = torch.cat([ring[:, :, held][:, :, order], new[:, :, keep]], dim=2)[:, :, -W:]
    ring[:, :, : kept_pos.numel()] = kept
    slot_position[: kept_pos.numel()] = kept_pos
    return ring, slot_position
""",
}
EXPECT = {"ex14_ring_write": ("wrong values", "buffer shifted")}
