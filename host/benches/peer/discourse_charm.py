"""Discourse as a Python ops charm: the same logic as charms/discourse (Rust).

On db-relation-changed (and config-changed, leader-elected) the leader sets a pod spec whose
environment carries PostgreSQL's `master` connection string; every unit then reports active.
While the string is missing, the unit waits.
"""

import ops

META = {
    "name": "discourse",
    "summary": "Discourse discussion forum",
    "requires": {"db": {"interface": "pgsql"}},
}

CONFIG = {
    "options": {
        "image": {"type": "string", "default": "discourse/discourse:2.6"},
        "external_hostname": {"type": "string", "default": "discourse.local"},
        "developer_emails": {"type": "string"},
    }
}


class DiscourseCharm(ops.CharmBase):
    """The Discourse charm."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        framework.observe(self.on.db_relation_changed, self._configure_pod)
        framework.observe(self.on.config_changed, self._configure_pod)
        framework.observe(self.on.leader_elected, self._configure_pod)

    def _master(self):
        relation = self.model.get_relation("db")
        if relation is None or relation.app is None:
            return None
        return relation.data[relation.app].get("master")

    def _configure_pod(self, _event):
        master = self._master()
        if master is None:
            self.unit.status = ops.WaitingStatus("waiting for database")
            return
        if self.unit.is_leader():
            spec = {
                "version": 3,
                "containers": [
                    {
                        "name": "discourse",
                        "imageDetails": {"imagePath": self.config["image"]},
                        "ports": [
                            {"name": "http", "containerPort": 3000, "protocol": "TCP"}
                        ],
                        "envConfig": {
                            "DISCOURSE_HOSTNAME": self.config["external_hostname"],
                            "DISCOURSE_DB": master,
                        },
                    }
                ],
            }
            # ops asks is-leader again here, as in the seed's failing hook.
            self.model.pod.set_spec(spec)
        self.unit.status = ops.ActiveStatus("")
