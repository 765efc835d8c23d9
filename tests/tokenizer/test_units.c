/* test_units.c — placeholder replaced below */
int main(void) { return 0; }
