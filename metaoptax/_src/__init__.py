"""The private core of metaoptax. Users import the public names from :mod:`metaoptax`."""
