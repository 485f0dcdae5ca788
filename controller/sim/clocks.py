"""The clocks a simulated environment runs under (episode_loop says what each does). Standard
library only: the `tempo` parser names them on a driver's install."""

CLOCKS = ("realtime", "lockstep")
