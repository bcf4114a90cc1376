// ors_lab front end: the trace view (ORS.views.trace).
