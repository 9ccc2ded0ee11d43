"""One lane's stream: its chunks cut into pointer blocks, the worker stage's results in
lane order, the serial operators; and the ``LanePlan`` every engine builds its lanes from."""
