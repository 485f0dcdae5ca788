"""openpi's websocket protocol, as `openpi-client` speaks it: its msgpack encoding of numpy
arrays, read strictly (codec), and the observation layouts of openpi's ALOHA, DROID and LIBERO
examples mapped to a policy's cameras, state and prompt (layouts). numpy and msgpack only."""
