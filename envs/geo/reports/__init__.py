"""The geo family's reports: ``compare`` (policies side by side, Fig. 4a tables), ``plots`` (the Fig. 4a
scatter), ``validate`` (the paper's §V-B engine replay), ``mlenergy_check`` (the engine model against
ML.ENERGY measurements) and ``bench`` (simulator speed); ``servegym.envs.geo.cli`` parses the command line
and calls them."""
