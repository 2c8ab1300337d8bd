"""The service proxy: Services and EndpointSlices turned into one nftables table (see `rules`)."""
