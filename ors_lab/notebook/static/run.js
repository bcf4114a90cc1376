// ors_lab front end: the run view (ORS.views.run).
