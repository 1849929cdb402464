"""An estimator's save folder (:mod:`.folder`), its values (:mod:`.codec`) and the registry of
estimator classes a save may name (:mod:`.registry`)."""
