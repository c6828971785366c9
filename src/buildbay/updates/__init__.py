"""In-app updates: the public update check an app calls with its application's update key."""
