// ors_lab front end: the session view (ORS.views.session).
