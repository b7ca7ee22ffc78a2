"""The networks (torch and Lightning): imported only when a run builds its workload, never to parse flags."""
