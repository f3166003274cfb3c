"""What starts dbus and what it runs against: the local services and a Spark standalone cluster."""
