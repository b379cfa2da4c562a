<?php
// SPDX-License-Identifier: Apache-2.0
// Loads Laravel, the chargeonce package and this application, with no
// Composer project of its own: Laravel is Debian's php-laravel-framework
// (its per-component autoloaders, all of them from Illuminate/autoload.php
// on the include path /usr/share/php), or Composer's when LARAVEL_AUTOLOAD
// names a vendor/autoload.php that has it. The package is loaded by its own
// Composer autoloader (composer dump-autoload in clients/php), which maps
// Chargeonce\ to src/; its Laravel classes then find Illuminate\ through
// whichever Laravel was loaded.

declare(strict_types=1);

$package = dirname(__DIR__, 4);
$packageAutoload = $package . '/vendor/autoload.php';
if (!is_file($packageAutoload)) {
    fwrite(STDERR, "run composer dump-autoload in $package first\n");
    exit(2);
}
require $packageAutoload;

$laravel = getenv('LARAVEL_AUTOLOAD') ?: 'Illuminate/autoload.php';
if ((require_once $laravel) === false) {
    fwrite(STDERR, "Laravel is not installed: no $laravel (Debian: apt-get install php-laravel-framework)\n");
    exit(2);
}

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'App\\')) {
        $file = dirname(__DIR__) . '/app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
