"""openpi's websocket protocol, as `openpi-client` speaks it: its msgpack encoding of numpy
arrays, read strictly (codec), the observation layouts of openpi's ALOHA, DROID and LIBERO
examples mapped to a policy's cameras, state and prompt (layouts), and the websocket server that
checks connections and requests and hands them to a backend (websocket_server: the `websockets`
package, imported only when it runs). numpy, msgpack and websockets only; the daemon's sessions
behind it are controller.daemon's."""
