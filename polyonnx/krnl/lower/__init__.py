"""Op-family lowerings; importing this package registers them all."""
