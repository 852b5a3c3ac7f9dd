"""ex16: admission without the free-block check; the pool made larger so that allocate never fails."""
from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {"ex16_serve": edited("ex16", "ex16_serve", [
    ('pool = BlockPool(num_blocks * bs, bs,',
     'pool = BlockPool(4 * num_blocks * bs, bs,'),
    ('            if new > len(pool.free):\n                break\n',
     ''),
    ('                while not pool.free:',
     '                while pool.blocks_in_use >= num_blocks:'),
])}
EXPECT = {"ex16_serve": ("wrong values", 'more blocks held than the pool has')}
