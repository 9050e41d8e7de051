"""The training engines: gradient norms (``grads``), NaN/Inf localization (``nan``), the gradient history the
doctor reads (``_gradhistory``) and the loss-curve statistics (``_dynamics``)."""
