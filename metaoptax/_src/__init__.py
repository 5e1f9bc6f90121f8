"""The private core of metaoptax: the MetaOptimize engine and its pytree, sharding and
dependency helpers. Users import the public names from :mod:`metaoptax`."""
