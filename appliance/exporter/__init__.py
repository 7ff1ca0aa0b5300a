"""Front end: ``hvnet exporter``'s HTTP server, serving what :mod:`appliance.services.scrape` collects."""
