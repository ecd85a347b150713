"""The admin REST API a simulated broker answers: the route table (``routes.py``) and one module per resource
class of Pulsar's (BrokersBase, BrokerStatsBase, ClustersBase, NamespacesBase and TenantsBase,
TopicLookupBase), each handler a function of the call (``call.py``) and its path parameters."""
