package postgres

// Migrations are the embedded migrations, for the upgrade test.
var Migrations = migrations
