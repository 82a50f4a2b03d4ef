"""Engine replicas: the engine server (`finserve engine`), the client the gateway uses to reach one
(RemoteEngineClient), the replica set with routing, probing and failover, and the router's pure picks."""
